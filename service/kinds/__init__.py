"""The job kinds' slices, one folder per kind (cases, goals, evals): each holds its models, store, fleet
side (enqueue, reconcile, counters) and front ends (api, cli, metrics). The core imports none of them."""
