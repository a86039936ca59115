from casekit.cli import main

main()
