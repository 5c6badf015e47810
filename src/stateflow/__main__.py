"""``python3 -m stateflow``: the ``stateflow`` command, for where its script is not on PATH."""

from stateflow.cli.main import main

main()
