"""URLconf for the test suite; API tests override ROOT_URLCONF or add routes here."""

urlpatterns: list = []
