"""The reference pages, installed with the package so that messages can point at them
(``lmms_egoplan.core.documentation``)."""
