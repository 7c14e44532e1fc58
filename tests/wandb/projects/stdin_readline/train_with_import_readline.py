# In the style of wandb/wandb tests/system_tests/test_sweep/train_with_import_readline.py: a run that imports
# readline and reads stdin must get EOF (the agent's stdin is not the program's), not hang.
import wandb


def main() -> None:
    with wandb.init() as run:
        import readline  # noqa: F401

        try:
            input("Enter something: ")
            got_eof = 0
        except EOFError:
            got_eof = 1
        run.log({"test_param": run.config.test_param, "got_eof": got_eof})


if __name__ == "__main__":
    main()
