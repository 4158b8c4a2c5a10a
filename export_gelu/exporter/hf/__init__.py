"""Hugging Face `save_pretrained` folders: the config and weights (folder), the task and its
transformers class (tasks), the graphs a task exports (graphs), their example inputs (inputs)
and key/value caches as plain tensors (cache)."""
