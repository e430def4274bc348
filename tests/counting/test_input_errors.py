"""Bad input gets a clear error naming the parameter and the fix; a failed fit keeps the previous model."""

import numpy as np
import pandas as pd
import pytest

from gpumine.counting import CategoricalNB, frequent_itemsets
from gpumine.neighbors import kneighbors


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, 0])
def test_working_memory_must_be_positive_and_finite(value):
    with pytest.raises(ValueError, match="working_memory must be a positive, finite number"):
        kneighbors(np.ones((3, 2), np.float32), k=1, device="cpu", working_memory=value)


def test_a_one_dimensional_transaction_array_is_refused_with_the_shape():
    with pytest.raises(ValueError, match="must be 2-D"):
        frequent_itemsets(np.array([True, False]))


def test_categorical_nb_names_x_and_the_encoder_for_strings():
    df = pd.DataFrame({"a": pd.Categorical(["x", "y", "x"]), "b": pd.Categorical(["u", "u", "v"])})
    with pytest.raises(ValueError, match="X holds values that are not integer category codes.*OrdinalEncoder"):
        CategoricalNB(device="cpu").fit(df, [0, 1, 0])


def test_a_failed_fit_keeps_the_previous_model():
    X = np.array([[0, 1], [1, 0], [1, 1], [0, 0]])
    nb = CategoricalNB(device="cpu").fit(X, [0, 1, 1, 0])
    before = nb.predict_proba(X)
    with pytest.raises(ValueError):
        nb.fit(X, [0, 1])  # wrong number of labels
    np.testing.assert_array_equal(nb.predict_proba(X), before)
    assert nb.classes_.tolist() == [0, 1]


def test_partial_fit_refuses_different_classes_later():
    X = np.array([[0, 1], [1, 0]])
    nb = CategoricalNB(device="cpu").partial_fit(X, [0, 1], classes=[0, 1])
    nb.partial_fit(X, [1, 0], classes=[1, 0])  # the same classes in another order
    with pytest.raises(ValueError, match="is not the same as on last call to partial_fit"):  # scikit-learn's words
        nb.partial_fit(X, [0, 1], classes=[0, 1, 2])
