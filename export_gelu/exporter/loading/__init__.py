"""Loading a model: a file of any supported kind or a Hugging Face folder as the module to run
(load), a model handed over in memory (in_memory), the user's own code named for loading
(user_code), an archive's pytree types (pytree_types), the dtype it computes in (model_dtype)."""
