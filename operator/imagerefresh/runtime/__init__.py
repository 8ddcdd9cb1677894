"""The imperative shell around the planner: gather evidence, apply plans, tick policies."""
