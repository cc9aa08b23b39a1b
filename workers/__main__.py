"""`python -m ntklab.workers`: run one worker node (see workers/main.py)."""

from ntklab.workers.main import main

main()
