"""How fast Scaler moves data (results, graph intermediates, arguments, arrays), against Dask and the seeds' engine."""
