"""Declared states: JSON-Schema-declared documents, one per subject, with an audit trail."""

from stateflow.states.models import Declaration, DoorContext, StateSubject, WriteOrigin
from stateflow.states.service import StatesService

__all__ = ["Declaration", "DoorContext", "StateSubject", "StatesService", "WriteOrigin"]
