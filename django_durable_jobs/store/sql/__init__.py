"""Every statement the store compiles by hand; database differences go through dbvendor."""
