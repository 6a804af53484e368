"""``python -m jdata``: the command line (``jdata --help``)."""

from jdata.cli import main

if __name__ == "__main__":  # not when pytest's --doctest-modules imports it
    raise SystemExit(main())
