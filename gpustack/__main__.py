from gpustack.cli.app import main

main()
