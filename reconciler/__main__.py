from reconciler.cli import main_then_exit

main_then_exit()
