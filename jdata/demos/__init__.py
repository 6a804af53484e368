"""The demos behind ``make demo`` and ``make demo-service``.

They run from a clone or the sdist (``python -m jdata.demos.train``) and are left out of the
wheel: a training job's image has no use for them.
"""
