"""Report output: text, JSON and call-tree rendering of a roll call."""
