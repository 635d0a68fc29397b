"""Git at the edge: read policies at a revision (repo), commit the output (flow), and compare two
compiles for review (report)."""
