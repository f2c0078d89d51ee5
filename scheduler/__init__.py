"""The scheduler: plans pipelines as a networkx DAG and runs them in-process or on Ray."""
