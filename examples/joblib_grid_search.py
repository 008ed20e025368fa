import joblib
from sklearn.datasets import load_iris
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVC

import scaler.joblib  # noqa: F401  registers the "scaler" backend

X, y = load_iris(return_X_y=True)
search = GridSearchCV(SVC(), {"C": [0.1, 1, 10, 100], "gamma": ["scale", 0.01, 0.1, 1]}, cv=5, n_jobs=-1)

with joblib.parallel_config(backend="scaler", address="tcp://127.0.0.1:2345"):
    search.fit(X, y)  # 80 fits, run by the cluster's workers

print(search.best_params_)  # {'C': 1, 'gamma': 0.1}
