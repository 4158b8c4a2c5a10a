"""The steps commands are made of: each a function whose parameters are what it needs and whose
return value is what it made (the records in results.py and beside each step). The work itself
is done by the rooms below (exporter/, passes/, check/, device/); a step calls them and says
what it did through the run (run.py: progress, notes)."""
