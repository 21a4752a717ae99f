"""The paper's analyses: parameter counts beside Tables 1 and 5, and Figure 1's layer-to-layer transitions."""
