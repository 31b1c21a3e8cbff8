(function(){
function rel(s){var a=Math.round(Math.abs(s)),t;if(a<10)return"just now";
if(a<90)t=a+" s";else if(a<5400)t=Math.round(a/60)+" min";else if(a<172800)t=Math.round(a/3600)+" h";else t=Math.round(a/86400)+" d";
return s>=0?t+" ago":"in "+t;}
function tick(){var now=Date.now()/1000,ts=document.querySelectorAll("time[data-ts]");
for(var i=0;i<ts.length;i++){var e=ts[i],t=Number(e.getAttribute("data-ts"));
e.textContent=rel(now-t);e.title=new Date(t*1000).toLocaleString();}}
tick();setInterval(tick,15000);
})();
