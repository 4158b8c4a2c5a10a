"""What a model input is: `--input` specs and `.npz` files (specs), realistic values made by
each input's role (generated), and how a named feed is passed to the model (call_plan)."""
