"""e2e/querybench (querybench.py): the query benchmark of the traces table, layout by layout;
e2e/querybench compat (readercompat.py): every reader's queries against every schema version."""
