"""The acceptance gate on the worker: an apply's candidate, its gate's evaluation on the fleet, the
verdict, and the publish (re-based when the current version moved on) or the rejection."""
