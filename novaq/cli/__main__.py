"""``python -m novaq.cli``: the ``novaq`` command (the tests and the launcher's children
run it this way, with the interpreter of the virtualenv)."""

from novaq.cli import main

main()
