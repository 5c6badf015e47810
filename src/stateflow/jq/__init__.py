"""jq programs under hard limits: every evaluation runs in a worker process that is killed when
it exceeds its time limit and cannot grow past its memory limit."""

from stateflow.jq.runner import JqBusy, JqError, JqLimitExceeded, JqRunner, JqUnavailable

__all__ = ["JqBusy", "JqError", "JqLimitExceeded", "JqRunner", "JqUnavailable"]
