// Extra chart cards on the sweep page. A card is {id, title, applies(view) -> bool, draw(plot, view) ->
// Promise}: `view` is the SweepView (view.summary, view.cols -- the /trials columns --, view.table), `plot`
// the card's empty div (Plotly is loaded by then). The sweep page adds a card for every registered one
// that applies, below the first screen, draws it with the others, redraws it when the trials change and
// waits for it before it sets its "every chart drawn" sentinel. A multi-objective sweep's Pareto front
// is meant to be one of these (a module that calls registerCard and is imported by sweep.js).
const CARDS = [];

export function registerCard(card) {
  if (!card || !card.id || typeof card.draw !== "function") throw new Error("a card needs an id and a draw()");
  CARDS.push({ applies: () => true, title: card.id, ...card });
}

export function cardsFor(view) {
  return CARDS.filter((c) => { try { return c.applies(view); } catch (e) { return false; } });
}
