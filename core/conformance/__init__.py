"""The conformance suite: one set of tests run against every discovered device.

Run it with ``pytest -p pyoffload.testing --pyargs pyoffload.conformance``.  The device images
come from each backend (``conformance_images_impl``), so the tests themselves are backend-neutral.
"""
