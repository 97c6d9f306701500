"""JUnit XML in the house style, shared by `allot test` and `allot lint`: suites of cases, counts, indented."""

from __future__ import annotations

import xml.etree.ElementTree as ET


def testsuites(name: str) -> ET.Element:
    """The root element; `finish` fills its totals."""
    return ET.Element("testsuites", name=name)


def finish(root: ET.Element) -> str:
    """Sum each suite's tests, failures and errors into the root and serialize with the XML declaration."""
    for key in ("tests", "failures", "errors"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in root.iter("testsuite"))))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
