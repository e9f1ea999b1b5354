"""Model-side experiment scripts: one module per paper figure (``python -m experiments.figures.fig07_layers``).

Each script writes its results (CSV + JSON with provenance) and draws its figure from the CSV alone.
"""
