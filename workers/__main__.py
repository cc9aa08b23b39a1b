"""`python -m workers`: run one worker node (see workers/main.py)."""

from workers.main import main

main()
