"""The bundled default checkpoint (`default/`), package data; `training/` at the repository root trains it."""
