"""The paper's analyses: parameter counts beside Tables 1 and 4, Figure 1's layer-to-layer transitions, and its
controlled experiments (Tables 3-8, 11-12, Figures 1-2) as resumable grids of runs (`litebert reproduce`)."""
