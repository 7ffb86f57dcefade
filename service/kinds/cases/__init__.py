"""The case slice: reading case files (the rest of the case kind's service side still sits in the shared
front ends: docs/architecture.md, "The code's layout")."""
