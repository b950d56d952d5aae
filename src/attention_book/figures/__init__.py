"""Chapter-specific figures: one module per chapter, imported only by its chapter.

``figures.chapter01`` .. ``figures.chapter07`` draw what only that chapter shows (the
heatmap every chapter uses is :func:`attention_book.plot_attention`). They import the
floors below (model code, data, training, analysis); nothing in the library imports them.
"""
