from sweeplab.cli import main

main()
