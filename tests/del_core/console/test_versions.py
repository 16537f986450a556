"""del_core.console.versions: the one line the image's label and `IMAGE --version` say, and the
build-time check that refuses a label the installed packages contradict."""

from importlib.metadata import version

import torch

from del_core.console import versions


def test_the_line_names_the_installed_release_versions_and_the_accelerator(capsys):
    expected = (
        f"del_core {version('del-core')}, torch {version('torch').split('+')[0]}, "
        f"deepspeed {version('deepspeed')}, transformers {version('transformers')}, "
        f"{'cuda ' + torch.version.cuda if torch.version.cuda else 'cpu'}"
    )
    assert versions.installed_versions().line() == expected
    assert versions.main([]) == 0 and capsys.readouterr().out == expected + "\n"
    assert versions.main(["--expect", expected]) == 0 and capsys.readouterr() == ("", "")


def test_a_label_the_packages_contradict_is_refused_naming_both(capsys):
    line = versions.installed_versions().line()
    wrong = line.replace("torch ", "torch 9", 1)
    assert versions.main(["--expect", wrong]) == 1
    assert capsys.readouterr().err == f"error: installed {line!r}, expected {wrong!r} (the image's label would lie)\n"
    assert versions.main(["--bogus"]) == 2


def test_an_absent_distribution_reads_absent():
    assert versions.StackVersions("1", "2", "absent", "4", "cpu").line() == (
        "del_core 1, torch 2, deepspeed absent, transformers 4, cpu"
    )
    assert versions._release("no-such-distribution-del") == "absent"
