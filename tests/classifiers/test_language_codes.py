"""Target languages are checked against the real LID model's labels before any work starts."""

from __future__ import annotations

import pytest

from classifiers.lid import LanguageCodeError, check_languages, model_labels


def test_ft176_labels_are_read_from_the_model() -> None:
    labels = model_labels()
    assert len(labels) == 176 and {"en", "de", "zh", "als"} <= set(labels)


def test_known_codes_pass() -> None:
    check_languages(["en", "de", "fr"])


@pytest.mark.parametrize(("code", "named"), [("eng", "'en'"), ("deu", "'de'"), ("ger", "'de'"), ("fra", "'fr'")])
def test_three_letter_code_names_the_models_code(code: str, named: str) -> None:
    with pytest.raises(LanguageCodeError) as err:
        check_languages(["en", code])
    message = str(err.value)
    assert "\n" not in message
    assert message == f"language {code!r} is not a label of lid.176.ftz; its code for this language is {named}"


def test_unknown_code_says_so() -> None:
    with pytest.raises(LanguageCodeError, match=r"'xx' is unknown to lid.176.ftz \(176 labels, e.g. "):
        check_languages(["xx"])


def test_glotlid_style_labels_name_the_script_variants() -> None:
    labels = ["eng_Latn", "deu_Latn", "srp_Cyrl", "srp_Latn"]
    check_languages(["eng_Latn"], labels=labels)
    with pytest.raises(LanguageCodeError, match="its code for this language is 'eng_Latn'"):
        check_languages(["en"], labels=labels)
    with pytest.raises(LanguageCodeError, match="'srp_Cyrl' or 'srp_Latn'"):
        check_languages(["sr"], labels=labels)
