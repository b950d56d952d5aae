"""Floor 3, analysis and presentation: measurements, number formatting and the one heatmap.

=======================  ======================================================  =======
module                   what it holds                                           chapter
=======================  ======================================================  =======
``analysis.cost``        exact cost counts, timings, log-log slope, parameters   1, 4
``analysis.heads``       where heads look: hit rates, focus, head patterns       2, 4, 6, 7
``analysis.vectors``     contextual similarity, largest difference of tensors    5, 7
``analysis.baselines``   the best an order-blind model can do                    5
``analysis.gradients``   gradient reaching the bottom: post- vs pre-norm         6
``analysis.formatting``  how numbers are printed (chapters and widgets)          all
``analysis.plotting``    the one heatmap, one colour map, attention heatmaps     all
=======================  ======================================================  =======

May import floors 0-2; model code, data and training never import it. Chapter-specific
figures are one floor up, in :mod:`attention_book.figures`.
"""
