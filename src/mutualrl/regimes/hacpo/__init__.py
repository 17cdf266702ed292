"""HACPO (arXiv 2603.02604), a variant of PRP: ``spec`` (settings; torch-free), ``maths`` (the four mechanisms of
its Sec. 3), ``adapter`` (PRP's pooled batch with HACPO's advantages and peer-row weights)."""
