"""Control-flow operators: If, Loop, Scan, SequenceMap."""
