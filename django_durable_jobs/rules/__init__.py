"""The words and rules: errors, settings, vocabulary, validation and the values they judge.

Pure: nothing here imports a model or opens a connection, so every layer above may use it and
its tests need no database. ``conf`` sits here because validation reads settings (the payload cap,
the scope names); ``registry`` and ``quotas`` are the operations and limits a project declares.
"""
