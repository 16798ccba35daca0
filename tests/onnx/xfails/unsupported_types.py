"""Cases jaxport does not run by design: values JAX cannot hold."""

EXPECTED_FAILURES: dict[str, str] = {}
