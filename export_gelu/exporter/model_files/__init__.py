"""Model files before they load: which kind a file is, told by content (detect), and the safety
checks a load obeys: code that computes only on tensors (containment), archive JSON free of
what torch would run (program_json), the files a load may read (model_reads)."""
