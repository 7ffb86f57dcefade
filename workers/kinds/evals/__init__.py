"""The evaluation item kind, and the acceptance gate that runs its items (`gate/`)."""
