"""Public constants shared by the API, the plan and the runtime."""

# Same values as tf.data so that ported code comparing against them keeps working.
AUTOTUNE = -1
INFINITE = -1
UNKNOWN = -2

# Where error messages and help send users: a wheel holds no docs directory.
DOCS_URL = "https://jdata-jax.readthedocs.io"
