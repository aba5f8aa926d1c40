"""The files a run writes (results directory, JUnit) and the code that reads them back."""
