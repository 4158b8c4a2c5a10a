"""The run report: typed records, JSON, the one-screen summary, Markdown and plots."""
