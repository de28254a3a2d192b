from ddlbench.cli import main

main()
