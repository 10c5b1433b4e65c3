"""What a reader sees: the plot kit and every figure (scaling, history, comparison), the findings
in words, the sweep's closing lines. Draws what it is given: it reads the analysis tables and
never the history (history/ builds the frames drawn here)."""
