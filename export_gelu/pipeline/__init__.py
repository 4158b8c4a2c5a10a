"""A run as a list of named stages over one typed state (`RunState`): every command
(export, verify, compare-forms, device verify, inspect) is such a list, built in
`export_gelu.api` from the stages defined here."""
