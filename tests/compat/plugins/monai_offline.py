"""pytest plugin for MONAI's tests offline: their test-data downloads do nothing (the file
stays absent), so that a ``setUp`` that downloads a file only some of its tests read (test_warp's
itk test) does not fail every test of the class. Tests that read the file skip or fail on
their own."""


def pytest_configure(config):
    import monai.apps.utils

    def download_url(url, filepath="", *args, **kwargs):
        return None

    monai.apps.utils.download_url = download_url
