"""The ``stateflow`` command line."""
