"""Expected ONNX failures of the text ops (StringConcat, StringSplit, RegexFullMatch,
StringNormalizer; TfIdfVectorizer's integer cases all pass): every case over string tensors."""

from tests.conformance.expectations import Expected

from .reasons import STRINGS

EXPECTED_FAILURES: dict[str, Expected] = {
    "test_regex_full_match_*": STRINGS,
    "test_string_concat*": STRINGS,
    "test_string_split_*": STRINGS,
    "test_strnormalizer_*": STRINGS,
}
