"""The acceptance gate (docs/architecture.md, "The acceptance gate"): an apply makes a candidate version,
which an evaluation of the cases that passed must accept before it is published."""
