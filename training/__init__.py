"""The bundled default model's training recipe: its corpus, tool dialogues and the trainer (`train_default`)."""
