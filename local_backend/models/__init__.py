"""The bundled default checkpoint (`default/`) and the recipe that trains it (`train_default`)."""
