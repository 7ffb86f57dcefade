"""The Python client (`TunefleetClient`): submits cases, reads status and results, controls tunings."""

from service.client.client import TunefleetClient

__all__ = ["TunefleetClient"]
